"""The Python reference for `benches/check-stdin.sh`: pydantic-ai-filesystem-sandbox's
`Sandbox.can_read` (or `can_write` with --write) on every path read from standard input,
one verdict line per path, as `workcell check --stdin` prints them.

    python3 benches/check_stdin_ref.py [--write] < paths.txt

Run in the project directory the script builds (zones src ro, docs ro with suffixes
.txt/.md, out rw). `pip install pydantic-ai-filesystem-sandbox`.
"""

import sys

from pydantic_ai_filesystem_sandbox import Mount, Sandbox, SandboxConfig


def main() -> None:
    write = "--write" in sys.argv[1:]
    sandbox = Sandbox(
        SandboxConfig(
            mounts=[
                Mount(host_path="./src", mount_point="/src", mode="ro"),
                Mount(host_path="./docs", mount_point="/docs", mode="ro", suffixes=[".txt", ".md"]),
                Mount(host_path="./out", mount_point="/out", mode="rw"),
            ]
        )
    )
    can = sandbox.can_write if write else sandbox.can_read
    out = sys.stdout
    refused = False
    for line in sys.stdin:
        path = line.rstrip("\n").rstrip("\r")
        if not path:
            continue
        if can(path):
            out.write(f"allowed\t{path}\n")
        else:
            refused = True
            out.write(f"refused\t{path}\n")
    sys.exit(1 if refused else 0)


if __name__ == "__main__":
    main()
