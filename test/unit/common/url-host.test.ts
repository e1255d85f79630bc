import { describe, expect, it } from "vitest";
import { dialHost } from "../../../common/url-host.js";

describe("dialHost", () => {
  it.each([
    ["https://[::1]:8443/", "::1"],
    ["http://[2001:db8::7]:80/", "2001:db8::7"],
    ["https://127.0.0.1:8443/", "127.0.0.1"],
    ["https://control-plane.example:443/", "control-plane.example"],
  ])("%s dials %s", (url, host) => {
    expect(dialHost(new URL(url))).toBe(host);
  });
});
