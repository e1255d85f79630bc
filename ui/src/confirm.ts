// A confirm step inside the page (no window.confirm): the question and two buttons in a status box,
// the action run only on "Confirm". Read-only roles get the controls disabled, with a note saying why.
import { h } from "./dom.js";

/** Shows `question` in `box`; `run` is called on Confirm, the box cleared either way. */
export function confirmInto(box: HTMLElement, question: string, run: () => Promise<unknown>): void {
  box.replaceChildren(
    h(
      "div",
      { class: "confirm", role: "status", "data-testid": "confirm" },
      h("span", { "data-testid": "confirm-question" }, question),
      " ",
      h(
        "button",
        {
          type: "button",
          "data-testid": "confirm-yes",
          onclick: () => {
            box.replaceChildren();
            void run();
          },
        },
        "Confirm",
      ),
      " ",
      h("button", { type: "button", class: "secondary", "data-testid": "confirm-no", onclick: () => box.replaceChildren() }, "Cancel"),
    ),
  );
}

/** The note beside controls the signed-in role may not use. */
export function readOnlyNote(): HTMLElement {
  return h(
    "p",
    { class: "hint", "data-testid": "read-only-note" },
    "Signed in with the read-only key: these actions need the admin key (the server refuses them too).",
  );
}
