-- Two agents' first samples of a day can arrive together: both transactions
-- then create that day's partition, and the second failed (42P07, or a
-- unique violation on the catalog) with its whole batch. The partition is now
-- created only when it does not exist, and losing that race is not an error.
CREATE OR REPLACE FUNCTION arbiter_ensure_sample_partition(day date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  name text := 'gpu_samples_' || to_char(day, 'YYYYMMDD');
BEGIN
  IF to_regclass(quote_ident(name)) IS NOT NULL THEN
    RETURN;
  END IF;
  BEGIN
    EXECUTE format(
      'CREATE TABLE IF NOT EXISTS %I PARTITION OF gpu_samples FOR VALUES FROM (%L) TO (%L)',
      name, (day::timestamp AT TIME ZONE 'UTC'), ((day + 1)::timestamp AT TIME ZONE 'UTC'));
  EXCEPTION WHEN duplicate_table OR unique_violation THEN
    NULL;  -- Another transaction created it first.
  END;
END $$;
