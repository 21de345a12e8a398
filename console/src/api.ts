// The console's clients of arbiter.v1: the generated service descriptors
// over the Connect protocol (JSON), on the origin that served the console,
// with the signed-in user's ID token on every call.
import { createClient, type Client, type Interceptor, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AllocationService } from "./gen/arbiter/v1/allocation_pb";
import { ChargebackService } from "./gen/arbiter/v1/chargeback_pb";
import { GovernanceService } from "./gen/arbiter/v1/governance_pb";
import { InventoryService } from "./gen/arbiter/v1/inventory_pb";
import { LedgerService } from "./gen/arbiter/v1/ledger_pb";
import { TelemetryService } from "./gen/arbiter/v1/telemetry_pb";

const TOKEN_KEY = "arbiter.id_token";

// The ID token: from the URL fragment the issuer redirected back with
// (#id_token=..., the OIDC implicit flow's form), else from this tab's
// session storage.
export function takeTokenFromUrl(): void {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ""));
  const token = fragment.get("id_token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, "", location.pathname + "#/");
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string): void {
  sessionStorage.setItem(TOKEN_KEY, value.trim());
}

export function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

const bearer: Interceptor = (next) => async (req) => {
  const t = token();
  if (t) req.header.set("Authorization", `Bearer ${t}`);
  return next(req);
};

const transport = createConnectTransport({
  baseUrl: location.origin,
  interceptors: [bearer],
});

export const api: {
  allocation: Client<typeof AllocationService>;
  chargeback: Client<typeof ChargebackService>;
  governance: Client<typeof GovernanceService>;
  inventory: Client<typeof InventoryService>;
  ledger: Client<typeof LedgerService>;
  telemetry: Client<typeof TelemetryService>;
} = {
  allocation: createClient(AllocationService, transport),
  chargeback: createClient(ChargebackService, transport),
  governance: createClient(GovernanceService, transport),
  inventory: createClient(InventoryService, transport),
  ledger: createClient(LedgerService, transport),
  telemetry: createClient(TelemetryService, transport),
};

// "permission_denied: ..." for a Connect error, the message otherwise.
export function errorText(err: unknown): string {
  if (err instanceof ConnectError) {
    const name = Code[err.code].replace(/[A-Z]/g, (c, i) => (i ? "_" : "") + c.toLowerCase());
    return `${name}: ${err.rawMessage}`;
  }
  return err instanceof Error ? err.message : String(err);
}

// Why a page's live updates stopped, and what to do.
export function streamEndText(err: unknown): string {
  if (err instanceof ConnectError && err.code === Code.DeadlineExceeded) {
    return "updates stopped: your sign-in expired (sign in again to resume)";
  }
  return `updates stopped: ${errorText(err)} (reload to resume)`;
}

export function isUnauthenticated(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unauthenticated;
}
