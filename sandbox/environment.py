"""The environment of the user's code inside a sandbox, and where egress lives in there.

Built from an empty dict, never from the server's own environment: nothing of
the host (tokens, paths, cloud credentials) may leak in.

Nothing a run leaves in /workspace may run by itself in the session's later runs. So HOME
is the container's own tmpfs, not /workspace: a dotfile kept there (a `.pth` or
`usercustomize.py` in Python's user site, a `.gitconfig` with a hook, an `.npmrc`) would
act in every later run. And Python has no user site at all (PYTHONNOUSERSITE): site
imports `usercustomize` from anywhere on the path, and the path holds the session's
editable installs under /workspace (sandbox/inside/editable_site.py; `sitecustomize` is Debian's,
found first in the standard library's directory). With egress, the only
additions point standard clients at the in-container relay and the run's CA.
"""

from __future__ import annotations

from .inside.wire import SANDBOX_HOME

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
EGRESS_MOUNT = "/airlock/egress"
RELAY_PORT = 3128
CA_BUNDLE = "/tmp/.airlock/ca-bundle.pem"
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
)


def sandbox_environment(proxy_token: str | None = None) -> dict[str, str]:
    """The complete environment of a run; `proxy_token` only when the run has egress."""
    env = {
        "PATH": SANDBOX_PATH,
        "HOME": SANDBOX_HOME,
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
    }
    if proxy_token is None:
        return env
    proxy = f"http://airlock:{proxy_token}@127.0.0.1:{RELAY_PORT}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = env[name.lower()] = proxy
    # Empty on purpose: even "localhost" goes through the proxy, which decides.
    env["NO_PROXY"] = env["no_proxy"] = ""
    env["AIRLOCK_TOKEN"] = proxy_token
    env.update(dict.fromkeys(CA_VARIABLES, CA_BUNDLE))
    # Node's fetch ignores the proxy variables (and tries DNS) without this.
    env["NODE_USE_ENV_PROXY"] = "1"
    return env
