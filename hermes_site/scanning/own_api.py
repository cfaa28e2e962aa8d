"""A credential sent to the API it belongs to is how REST skills authenticate; the same
credential sent anywhere else is exfiltration.

The rule: an environment variable named for a service (`AIRTABLE_API_KEY`, `GITHUB_TOKEN`,
`STRIPE_SECRET_KEY`: a word of the name, beyond generic words such as API, KEY, TOKEN,
SECRET, ACCESS) may travel on a network command only when every destination on that line
is that service: an `https://` URL whose registrable domain is the service's name
(`api.airtable.com` → `airtable`, `api.github.com` → `github`), or, under a provider that
names its API hosts after services, the label below the provider's domain
(`tenor.googleapis.com` → `tenor` for `TENOR_API_KEY`), or a known alias (`GH_TOKEN`
→ github, `JIRA_API_TOKEN` → atlassian, `HF_TOKEN` → huggingface), or a variable named for
the same service (`$GITLAB_URL`). Everything else stays blocked: a generic name
(`$API_KEY`, `$TOKEN`), a file (`@~/.ssh/id_rsa`, `.env`), the whole environment, a
variable of another service, a plain `http://` URL, an IP address, a host that only contains
the name (`github.evil.example`), and hosts where anyone can publish (`*.github.io`,
`*.herokuapp.com`, `*.amazonaws.com`, Cloud Storage buckets…: their registrable name is
the tenant's, not the service's), and a line that reroutes the request (`--resolve`,
`--connect-to`, a proxy).

Why a name is enough: a variable only holds a real secret when the environment defines it,
and the environment names real credentials after their service. An attacker may write
`$EVIL_TOKEN` to `evil.example`, but that variable is empty; `$GITHUB_TOKEN` reaches only
GitHub, which already has it.
"""

from __future__ import annotations

import re

_GENERIC_WORDS = (
    "api key keys token tokens secret secrets access auth bearer private personal my app apps"
    " client bot pat password pass passwd pwd user username service admin prod production dev"
    " staging test live id oauth oauth2 refresh session webhook url uri account sid signing"
    " master root org team ci env read write publishable restricted default cli sdk base host"
    " endpoint server domain v1 v2 v3 local public new old main primary integration app_key"
    " credential credentials creds cookie"
)
_GENERIC = frozenset(_GENERIC_WORDS.split())
_ALIASES = {
    "gh": ("github",),
    "github": ("github", "githubusercontent"),
    "hf": ("huggingface", "hf"),
    "huggingface": ("huggingface", "hf"),
    "jira": ("atlassian",),
    "confluence": ("atlassian",),
    "atlassian": ("atlassian",),
    "bitbucket": ("bitbucket",),
    "datadog": ("datadoghq",),
    "dd": ("datadoghq",),
    "shopify": ("myshopify", "shopify"),
    "gemini": ("googleapis",),
    "google": ("googleapis",),
    "gcp": ("googleapis",),
    "youtube": ("googleapis",),
    "do": ("digitalocean",),
    "cf": ("cloudflare",),
    "tg": ("telegram",),
    "claude": ("anthropic",),
    "npm": ("npmjs",),
}
# Hosting where the name before the suffix is a tenant's, chosen by whoever publishes there.
_SHARED_SUFFIXES = (
    "github.io",
    "gitlab.io",
    "pages.dev",
    "workers.dev",
    "herokuapp.com",
    "vercel.app",
    "netlify.app",
    "ngrok.io",
    "ngrok.app",
    "ngrok-free.app",
    "appspot.com",
    "cloudfunctions.net",
    "azurewebsites.net",
    "amazonaws.com",
    "core.windows.net",
    "firebaseapp.com",
    "web.app",
    "glitch.me",
    "repl.co",
    "onrender.com",
    "fly.dev",
    "railway.app",
    "trycloudflare.com",
    "blogspot.com",
    # Buckets: anyone's, at storage.googleapis.com/<bucket> and <bucket>.storage.googleapis.com.
    "storage.googleapis.com",
    "firebasestorage.googleapis.com",
)
# Providers that name each API host after the service it serves (`tenor.googleapis.com`,
# `youtube.googleapis.com`): only the provider creates those names, so the label directly
# under the provider's domain names the service as much as a registrable name does.
_SERVICE_HOSTING = ("googleapis.com",)
_SECOND_LEVEL = frozenset({"co", "com", "org", "net", "ac", "ne", "or", "gov", "edu"})
_URL_HOST = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]{0,15})://(?:[^/\s\"'`@]{0,200}@)?(?P<host>[^/\s\"'`?#:\\)\]]{1,253})"
)
_VARIABLE_HOST = re.compile(
    r"(?:^|[\s\"'=(])\$\{?(?P<name>[a-z_][a-z0-9_]{0,60})\}?(?=[/\s\"'`)]|$)"
)
_HOST_VARIABLE_WORD = re.compile(r"(?:^|_)(?:url|uri|host|base|endpoint|server|domain|api)(?:_|$)")
# Options that send a request for the right host to another address or through a proxy.
_REROUTED = re.compile(
    r"--(?:resolve|connect-to|proxy|preproxy|socks[45]h?|doh-url|unix-socket|abstract-unix-socket)"
    r"\b|\bproxies\s*=|https?_proxy="
    # `-x` is curl's proxy; `-X POST` is the method (the text is read in lower case).
    r"|(?:^|\s)-x\s+(?!(?:post|get|put|patch|delete|head|options)\b)"
)
_IP = re.compile(r"^[0-9.]+$|^\[|^0x")


def service_names(variable: str) -> set[str]:
    """The registrable names a variable's service may be reached at (empty: generic)."""
    names: set[str] = set()
    for word in variable.lower().split("_"):
        if not word or word in _GENERIC or word.isdigit():
            continue
        names.update(_ALIASES.get(word, (word,)))
    return names


def registrable_name(host: str) -> str | None:
    """The label a host is registered under (`api.github.com` → `github`), or None for IP
    addresses, single labels and hosts under shared suffixes."""
    host = host.lower().rstrip(".")
    if _IP.search(host) or "." not in host:
        return None
    if any(host == s or host.endswith("." + s) for s in _SHARED_SUFFIXES):
        return None
    labels = host.split(".")
    if len(labels) >= 3 and labels[-2] in _SECOND_LEVEL and len(labels[-1]) == 2:
        return labels[-3]
    return labels[-2]


def destination_names(host: str) -> set[str] | None:
    """The service names a host answers for: its registrable name and, under a provider
    that names API hosts after services, the label below the provider (`tenor.googleapis.com`
    → googleapis, tenor); None where anyone can publish (see `registrable_name`)."""
    name = registrable_name(host)
    if name is None:
        return None
    names = {name}
    host = host.lower().rstrip(".")
    for provider in _SERVICE_HOSTING:
        if host.endswith("." + provider):
            names.add(host[: -len(provider) - 1].rsplit(".", 1)[-1])
    return names


def sends_to_own_api(body: str, variables: list[str], references: list[re.Match[str]]) -> bool:
    """True when every secret variable on this command line names the service of every
    destination on it (see the module docstring)."""
    wanted = [service_names(v) for v in variables]
    if not all(wanted) or _REROUTED.search(body):
        return False
    inside = [(m.start(), m.end()) for m in references]
    destinations: list[set[str]] = []
    for m in _URL_HOST.finditer(body):
        if any(lo <= m.start() < hi for lo, hi in inside):
            continue
        names = destination_names(m.group("host"))
        if m.group("scheme") != "https" or names is None:
            return False
        destinations.append(names)
    for m in _VARIABLE_HOST.finditer(body):
        var = m.group("name")
        if _HOST_VARIABLE_WORD.search(var) and not any(
            lo <= m.start("name") < hi for lo, hi in inside
        ):
            destinations.append(service_names(var))
    if not destinations:
        return False
    return all(names & dest for names in wanted for dest in destinations)
