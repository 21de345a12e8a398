-- Recurring reservations (docs/quotas-and-preemption.md, "Recurring reservations").
--
-- requests.recurrence: the recurring window of a series of reservations in
-- its canonical text form (core/recurrence.h), e.g. "weekdays 01:00-06:00
-- Europe/Berlin"; '' for any other request. Each occurrence is a request of
-- its own, keyed "<series key>@<start, Unix seconds>" after the first.
--
-- A column with a constant default rewrites no partition's rows.
ALTER TABLE requests
  ADD COLUMN recurrence text NOT NULL DEFAULT '' CHECK (length(recurrence) <= 256);
