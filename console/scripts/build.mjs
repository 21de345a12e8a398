// Bundles the console into dist/: app.js (esbuild, from src/main.ts),
// index.html and style.css. arbiterd serves dist/ with --console-assets.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
await build({
  entryPoints: [join(root, "src", "main.ts")],
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: true,
  outfile: join(dist, "app.js"),
  logLevel: "warning",
});
copyFileSync(join(root, "src", "index.html"), join(dist, "index.html"));
copyFileSync(join(root, "src", "style.css"), join(dist, "style.css"));
