-- The hourly usage rollups are computed in slices as the hour goes by
-- (app/telemetry_maintenance.h): each pass adds what the members held and
-- used since the last one, instead of recomputing the whole hour from its
-- start every minute, which read every member the hour had held. This
-- table records how far each hour is rolled up; a slice is added and its
-- end recorded in one transaction, only if the hour was rolled up to the
-- slice's start, so two replicas never add the same slice twice.
CREATE TABLE usage_progress (
  hour      timestamptz PRIMARY KEY,
  rolled_to timestamptz NOT NULL CHECK (rolled_to > hour)
);

-- The hours already rolled up were computed to the time of their last pass
-- (or to their end).
INSERT INTO usage_progress (hour, rolled_to)
SELECT hour, least(hour + interval '1 hour', max(computed_at))
FROM usage_hourly GROUP BY hour HAVING max(computed_at) > hour;
