// Generates the TypeScript messages and service descriptors of arbiter.v1
// from proto/ with protoc (Debian's protobuf-compiler) and protoc-gen-es, into
// src/gen (not committed: a field added to a .proto appears here on the next
// build).
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const protoRoot = join(root, "..", "proto");
const out = join(root, "src", "gen");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const protos = readdirSync(join(protoRoot, "arbiter", "v1"))
  .filter((f) => f.endsWith(".proto"))
  .map((f) => join("arbiter", "v1", f));
execFileSync(
  "protoc",
  [
    `-I${protoRoot}`,
    "-I/usr/include",
    `--plugin=protoc-gen-es=${join(root, "node_modules", ".bin", "protoc-gen-es")}`,
    `--es_out=${out}`,
    "--es_opt=target=ts,import_extension=none",
    ...protos,
  ],
  { cwd: protoRoot, stdio: "inherit" },
);
