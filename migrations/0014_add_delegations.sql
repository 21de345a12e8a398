-- Delegation of approval authority between principals, with an expiry.
CREATE TABLE delegations (
  from_principal text NOT NULL,
  to_principal   text NOT NULL,
  expires_at     timestamptz NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (from_principal, to_principal),
  CHECK (from_principal <> to_principal)
);
