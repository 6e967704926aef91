// Bundles the console (src/) with esbuild into internal/console/dist, which the Go binary
// embeds. `make web` runs it after `npm ci`.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";

const out = new URL("../internal/console/dist/", import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
writeFileSync(out + ".gitkeep", "");
await build({
  entryPoints: ["src/main.js"],
  bundle: true,
  minify: true,
  format: "iife",
  target: ["chrome110", "firefox115", "safari16"],
  outfile: out + "app.js",
  legalComments: "linked",
});
copyFileSync("node_modules/@xterm/xterm/css/xterm.css", out + "xterm.css");
copyFileSync("src/index.html", out + "index.html");
copyFileSync("src/app.css", out + "app.css");
