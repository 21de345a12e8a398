// The console: sign-in, who you are, and the pages, routed by the URL's
// fragment (#/team/inference, #/request, #/inbox, #/finance, #/operator).
import { api, errorText, isUnauthenticated, setToken, signOut, takeTokenFromUrl, token } from "./api";
import { h, status } from "./dom";
import { Role, ScopeKind } from "./gen/arbiter/v1/types_pb";
import type { WhoAmIResponse } from "./gen/arbiter/v1/governance_pb";
import { financePage } from "./pages/finance";
import { inboxPage } from "./pages/inbox";
import { operatorPage } from "./pages/operator";
import { requestPage } from "./pages/request";
import { teamPage } from "./pages/team";

// Who the user is, and what the pages may offer them.
export interface Session {
  me: WhoAmIResponse;
  // Teams the user is a member or admin of (their own teams' pages).
  teams: string[];
  // Reads every team's money: finance or auditor org-wide, or platform admin.
  orgReader: boolean;
  finance: boolean;
  admin: boolean;
}

function sessionOf(me: WhoAmIResponse): Session {
  const teams = new Set<string>();
  let orgReader = me.platformAdmin;
  let finance = me.platformAdmin;
  for (const b of me.bindings) {
    if ((b.role === Role.TEAM_MEMBER || b.role === Role.TEAM_ADMIN) && b.scopeKind === ScopeKind.TEAM) {
      teams.add(b.scope);
    }
    if ((b.role === Role.FINANCE || b.role === Role.AUDITOR) && b.scopeKind === ScopeKind.ORG) orgReader = true;
    if (b.role === Role.FINANCE && b.scopeKind === ScopeKind.ORG) finance = true;
  }
  return { me, teams: [...teams].sort(), orgReader, finance, admin: me.platformAdmin };
}

function roleText(me: WhoAmIResponse): string {
  if (me.platformAdmin) return "platform admin";
  const roles = me.bindings.map((b) => {
    const role = Role[b.role].toLowerCase().replace(/_/g, " ");
    return b.scope ? `${role} of ${b.scope}` : role;
  });
  return roles.length ? roles.join(", ") : "no roles";
}

const main = document.getElementById("main")!;
const nav = document.getElementById("nav")!;
const who = document.getElementById("who")!;
let session: Session | null = null;
// Ends the current page's streams when another page is shown.
let pageAbort = new AbortController();

function signInPage(message: string): void {
  nav.replaceChildren();
  who.replaceChildren();
  const field = h("textarea", { id: "token", rows: 4, cols: 80, "aria-describedby": "token-help" }) as HTMLTextAreaElement;
  const note = h("p", { role: "alert", class: message ? "error" : "muted" }, message);
  main.replaceChildren(
    h("h1", {}, "Sign in"),
    h("p", { id: "token-help", class: "muted" },
      "Sign in with an ID token from your organisation's OIDC issuer. Your issuer can redirect here with #id_token=...; or paste a token."),
    h("form", {
      class: "stack",
      onsubmit: (e: Event) => {
        e.preventDefault();
        setToken(field.value);
        void start();
      },
    }, h("label", { for: "token" }, "ID token"), field, h("p", {}, h("button", { type: "submit" }, "Sign in"))),
    note,
  );
}

function navigation(s: Session): void {
  const links: [string, string][] = s.teams.map((t) => [`#/team/${t}`, `Team ${t}`]);
  if (s.teams.length || s.admin) links.push(["#/request", "New request"]);
  links.push(["#/inbox", "Approvals"]);
  links.push(["#/finance", "Finance"]);
  if (s.admin || s.orgReader) links.push(["#/operator", "Operator"]);
  nav.replaceChildren(...links.map(([href, text]) => h("a", { href }, text)));
  who.replaceChildren(
    h("span", { id: "principal" }, s.me.principal), " ",
    h("span", { class: "muted", id: "roles" }, `(${roleText(s.me)})`), " ",
    h("button", { type: "button", onclick: () => { signOut(); signInPage(""); } }, "Sign out"),
  );
}

async function route(): Promise<void> {
  if (!session) return;
  pageAbort.abort();
  pageAbort = new AbortController();
  // "#/finance?month=2026-11&team=ml": the page, then its parameters.
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/";
  for (const a of nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === `#${path}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const parts = path.split("/").filter(Boolean);
  const page = h("div", { "data-page": parts[0] ?? "home" });
  main.replaceChildren(page);
  const signal = pageAbort.signal;
  try {
    switch (parts[0]) {
      case "team": await teamPage(page, decodeURIComponent(parts[1] ?? ""), session, signal); break;
      case "request": await requestPage(page, session); break;
      case "inbox": await inboxPage(page, session, signal); break;
      case "finance": await financePage(page, session); break;
      case "operator": await operatorPage(page, session); break;
      default:
        if (session.teams.length) location.hash = `#/team/${session.teams[0]}`;
        else if (session.orgReader) location.hash = "#/finance";
        else location.hash = "#/inbox";
    }
  } catch (err) {
    if (signal.aborted) return;
    if (isUnauthenticated(err)) return signInPage(errorText(err));
    const note = h("p", { role: "alert" });
    status(note, errorText(err), true);
    page.append(note);
  }
  main.focus();
}

async function start(): Promise<void> {
  takeTokenFromUrl();
  if (!token()) return signInPage("");
  try {
    session = sessionOf(await api.governance.whoAmI({}));
  } catch (err) {
    session = null;
    return signInPage(errorText(err));
  }
  navigation(session);
  await route();
}

window.addEventListener("hashchange", () => void route());
void start();
