// A small DOM builder: h("td", {class: "num"}, "12"). Text is always set as
// text, never parsed as HTML.
type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | undefined>;

export function h(tag: string, attrs: Attrs = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") el.addEventListener(key.replace(/^on/, ""), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el: HTMLElement, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

// A table with a caption (for screen readers), headers and rows; a cell
// that is a number or has class "num" is right-aligned.
export function table(caption: string, headers: string[], rows: Child[][], attrs: Attrs = {}): HTMLElement {
  return h(
    "table",
    attrs,
    h("caption", { class: "muted" }, caption),
    h("thead", {}, h("tr", {}, ...headers.map((x) => h("th", { scope: "col" }, x)))),
    h(
      "tbody",
      {},
      ...rows.map((row) =>
        h("tr", {}, ...row.map((cell) => (cell instanceof HTMLElement && cell.tagName === "TD" ? cell : h("td", typeof cell === "number" ? { class: "num" } : {}, cell)))),
      ),
    ),
  );
}

export function num(text: string, attrs: Attrs = {}): HTMLElement {
  return h("td", { class: "num", ...attrs }, text);
}

export function status(el: HTMLElement, text: string, isError = false): void {
  el.textContent = text;
  el.className = isError ? "error" : "muted";
}
