-- The tables every decision or every telemetry pass rewrites are vacuumed
-- after a fixed share of their rows is dead: by default 20%, which for a
-- requests table of 8 million rows (a few days at soak rates) lets 1.6
-- million dead rows pile up between passes, and the decisions slow down
-- while they do (bench/soak: throughput dipped with 410,000 to 470,000 dead
-- rows in `requests`). A request row is updated at each decision about it
-- (queued, admitted, released), and its indexed columns (state,
-- updated_at) change, so the updates are never HOT. These settings vacuum
-- at 1% (plus 10,000 rows) and let the pass run ten times as fast as the
-- default cost limit allows, so that dead rows stay a small, steady share.
ALTER TABLE requests SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 10000,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_limit = 2000
);

-- A rollup slice rewrites the usage row of every member live in the hour.
ALTER TABLE usage_hourly SET (
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_cost_limit = 2000
);

