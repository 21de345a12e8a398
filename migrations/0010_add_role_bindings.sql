-- Who may do what: role bindings (subject -> role -> scope), and the record
-- of calls refused for want of a role or an identity.
CREATE TABLE role_bindings (
  subject    text NOT NULL CHECK (length(subject) BETWEEN 1 AND 256),
  role       text NOT NULL CHECK (role IN ('platform_admin', 'pool_authority', 'team_admin',
                                           'team_member', 'finance', 'auditor', 'agent')),
  scope_kind text NOT NULL CHECK (scope_kind IN ('org', 'team', 'pool')),
  scope      text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (subject, role, scope_kind, scope),
  CHECK ((scope_kind = 'org') = (scope = ''))
);

CREATE TABLE access_denials (
  id         bigserial PRIMARY KEY,
  at         timestamptz NOT NULL DEFAULT now(),
  principal  text NOT NULL,  -- '' when the caller had no verified identity.
  method     text NOT NULL,
  code       text NOT NULL,  -- 'PERMISSION_DENIED' or 'UNAUTHENTICATED'.
  reason     text NOT NULL
);
CREATE INDEX access_denials_at ON access_denials (at);
