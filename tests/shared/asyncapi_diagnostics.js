// The official AsyncAPI parser's diagnostics for one document, as JSON on stdout.
// Run by tests/shared/test_asyncapi_parser.py with NODE_PATH at its cached @asyncapi/parser.
const fs = require("fs");
const { Parser } = require("@asyncapi/parser");

(async () => {
  const { diagnostics } = await new Parser().parse(fs.readFileSync(process.argv[2], "utf8"));
  const out = diagnostics.map((d) => ({
    code: String(d.code),
    severity: d.severity, // 0 error, 1 warning, 2 information, 3 hint
    message: d.message,
    path: d.path.join("."),
  }));
  process.stdout.write(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
