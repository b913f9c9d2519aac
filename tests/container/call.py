"""One HTTP request from inside the test's container network (tests/test_container.py).

    python call.py METHOD URL [BODY] [--out FILE]

Prints (or writes to FILE) {"status": ..., "body": ...}; status 0 when no answer came
(the error in body). The key is $KEY. Standard library only: it runs in the image.
"""

import json
import os
import sys
import urllib.error
import urllib.request


def call(method: str, url: str, body: str | None) -> dict[str, object]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",  # what an MCP client sends
        "Authorization": f"Bearer {os.environ['KEY']}",
    }
    data = None if body is None else body.encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except OSError as exc:
        return {"status": 0, "body": repr(exc)}
    try:
        return {"status": status, "body": json.loads(raw or b"null")}
    except ValueError:
        return {"status": status, "body": raw.decode(errors="replace")}


def main(argv: list[str]) -> None:
    out = None
    if "--out" in argv:
        at = argv.index("--out")
        out, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    answer = json.dumps(call(argv[0], argv[1], argv[2] if len(argv) > 2 else None))
    if out is None:
        print(answer)
    else:
        with open(out + ".part", "w") as f:
            f.write(answer)
        os.replace(out + ".part", out)


if __name__ == "__main__":
    main(sys.argv[1:])
