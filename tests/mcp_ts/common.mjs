// What both Node clients share (client.mjs, oauth.mjs): a tool result's structured value,
// and printing the script's one JSON line (or the error, with exit status 1).
export function structured(result) {
  if (result.isError) throw new Error(result.content.map((c) => c.text).join(" "));
  const value = result.structuredContent;
  return value && "result" in value ? value.result : value;
}

export function run(main) {
  main().then(
    (out) => console.log(JSON.stringify(out)),
    (err) => {
      console.log(JSON.stringify({ error: String(err && err.message ? err.message : err) }));
      process.exit(1);
    },
  );
}
