// A failed call's code and message above the page; a refused key signs out (the router then shows
// the sign-in form).
import { describeError, isUnauthenticated, signOut } from "./api.js";
import { h } from "./dom.js";

export function showError(main: HTMLElement, err: unknown): void {
  if (isUnauthenticated(err)) {
    signOut();
    window.dispatchEvent(new HashChangeEvent("hashchange"));
    return;
  }
  main.querySelector(":scope > .error")?.remove();
  main.prepend(h("p", { class: "error", role: "alert", "data-testid": "error" }, describeError(err)));
}
