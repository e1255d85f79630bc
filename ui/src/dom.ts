// Building DOM without innerHTML: text is always a text node, so nothing a node or an operator
// typed can become markup.
type Child = Node | string | number | null | undefined | false | Child[];
type Props = Record<string, string | number | boolean | undefined | ((e: Event) => void)>;

function apply(el: Element, props: Props): void {
  for (const [name, value] of Object.entries(props)) {
    if (typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else if (value !== false && value !== undefined) el.setAttribute(name, String(value));
  }
}

function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else if (c !== null && c !== undefined && c !== false) el.appendChild(document.createTextNode(String(c)));
  }
}

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  apply(el, props);
  append(el, children);
  return el;
}

export function svg(tag: string, props: Props = {}, ...children: Child[]): SVGElement {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  apply(el, props);
  append(el, children);
  return el;
}

export function table(headers: string[], rows: Child[][], testId?: string): HTMLTableElement {
  return h(
    "table",
    { "data-testid": testId },
    h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", {}, t)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))),
  );
}

export function section(title: string, ...children: Child[]): HTMLElement {
  return h("section", {}, h("h2", {}, title), ...children);
}

/** A form's named inputs as strings (checkboxes as "on" or ""). */
export function formValues(form: HTMLFormElement): Record<string, string> {
  const out: Record<string, string> = {};
  for (const el of Array.from(form.elements)) {
    if (!(el instanceof HTMLInputElement || el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement) || el.name === "")
      continue;
    out[el.name] = el instanceof HTMLInputElement && el.type === "checkbox" ? (el.checked ? "on" : "") : el.value;
  }
  return out;
}

/**
 * Makes `el`'s children look like `next`, keeping the elements that are already there (same tag,
 * same data-testid), so a page that re-renders every second does not pull a link or a field out
 * from under the pointer. A button is kept only when it has a data-testid (one per page, its
 * handler bound to the page's own subject); any other is replaced, since its handler may be bound
 * to another row's subject.
 */
export function morph(el: Element, next: Node[]): void {
  const old = Array.from(el.childNodes);
  next.forEach((n, i) => {
    const o = old[i];
    if (o === undefined) el.appendChild(n);
    else if (!keeps(o, n)) el.replaceChild(n, o);
    else if (o instanceof Element && n instanceof Element) {
      for (const a of Array.from(o.attributes)) if (!n.hasAttribute(a.name)) o.removeAttribute(a.name);
      for (const a of Array.from(n.attributes)) if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
      if (o instanceof HTMLProgressElement && n instanceof HTMLProgressElement) o.value = n.value;
      morph(o, Array.from(n.childNodes));
    } else if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
  });
  for (let i = old.length - 1; i >= next.length; i--) old[i]!.remove();
}

function keeps(o: ChildNode, n: Node): boolean {
  if (o.nodeType !== n.nodeType) return false;
  if (!(o instanceof Element) || !(n instanceof Element)) return true;
  if (o.tagName !== n.tagName || o.getAttribute("data-testid") !== n.getAttribute("data-testid")) return false;
  return o.tagName !== "BUTTON" || o.hasAttribute("data-testid");
}
