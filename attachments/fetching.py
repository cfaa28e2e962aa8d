"""Fetching a file a client names by URL (a `/v1` `image_url` that is not a `data:` URL), when
OPENAI_API_FETCH_IMAGE_URLS is on: the one module that fetches for attachments.

What it guards against is the hub being made to fetch from where it stands (server-side
request forgery): only `https`, no credentials in the URL, the host resolved once and every
address it resolves to public (not private, loopback, link-local, multicast, reserved or
unspecified, IPv4 inside IPv6 included), the connection made to that checked address (a
second, different DNS answer is never asked for), each redirect checked again the same way
(at most MAX_REDIRECTS), the body bounded by `max_bytes` and the whole fetch by `timeout`
seconds.
"""

import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

MAX_REDIRECTS = 3
_CHUNK = 64 * 1024
REDIRECTS = (301, 302, 303, 307, 308)


class FetchRefused(Exception):
    """The URL was not fetched, or not whole: `str(exc)` says why, in words for a person."""


@dataclass(frozen=True)
class Fetched:
    data: bytes
    content_type: str
    name: str  # the last segment of the final URL's path ("" when none)


def address_allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A public unicast address: the only kind the hub fetches from."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_unspecified
    )


def resolve_public(host: str, port: int) -> str:
    """The address to connect to for `host`: resolved once; refused unless every address
    the name has is public (one private answer among public ones is enough to refuse)."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise FetchRefused(f"The host {host!r} could not be resolved.") from exc
        addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
    if not addresses:
        raise FetchRefused(f"The host {host!r} has no address.")
    for address in addresses:
        if not address_allowed(address):
            raise FetchRefused(
                f"The host {host!r} is a private, loopback, link-local or otherwise "
                "non-public address; the hub fetches only from public addresses."
            )
    return str(addresses[0])


def tls_context() -> ssl.SSLContext:
    """The system's trusted certificates, host names checked (a seam for tests' own CA)."""
    return ssl.create_default_context()


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to `address`, with `host` for SNI, the certificate check and the Host header."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=tls_context())
        self._address = address

    def connect(self) -> None:
        # Not socket.create_connection: it would resolve the address again.
        family = socket.AF_INET6 if ":" in self._address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect((self._address, self.port))
        except OSError:
            sock.close()
            raise
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
        # Kept: http.client drops `sock` once a response says it closes the connection,
        # and the reads after that still need their timeout set.
        self.pinned_sock = self.sock


def _checked(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    if parts.scheme.lower() != "https":
        raise FetchRefused("Only https URLs are fetched; send the file as a data: URL instead.")
    if parts.username is not None or parts.password is not None:
        raise FetchRefused("A URL with a user name or password is not fetched.")
    host = parts.hostname
    if not host:
        raise FetchRefused("The URL has no host.")
    try:
        port = parts.port or 443
    except ValueError as exc:
        raise FetchRefused("The URL's port is not a number.") from exc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return host, port, target


def fetch_url(url: str, *, max_bytes: int, timeout: float) -> Fetched:
    """The body of `url` (see the module's docstring for what is refused), or FetchRefused."""
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        host, port, target = _checked(url)
        address = resolve_public(host, port)
        connection = _PinnedHTTPSConnection(host, port, address=address, timeout=timeout)
        try:
            connection.request("GET", target, headers={"User-Agent": "hermes-hub", "Accept": "*/*"})
            response = connection.getresponse()
            if response.status in REDIRECTS:
                location = response.getheader("Location")
                if not location:
                    raise FetchRefused(f"The URL redirected ({response.status}) to nowhere.")
                url = urljoin(url, location)
                continue
            if response.status != 200:
                raise FetchRefused(f"The URL answered {response.status}, not the file.")
            declared = response.getheader("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise FetchRefused(f"The file at the URL is larger than {max_bytes} bytes.")
            data = _read_bounded(connection, response, max_bytes, deadline)
            name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
            return Fetched(data, response.getheader("Content-Type") or "", name)
        except (OSError, http.client.HTTPException) as exc:
            raise FetchRefused(f"The URL could not be fetched: {exc}.") from exc
        finally:
            connection.close()
    raise FetchRefused(f"The URL redirected more than {MAX_REDIRECTS} times.")


def _read_bounded(connection, response, max_bytes: int, deadline: float) -> bytes:
    chunks, total = [], 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchRefused("The URL took too long to send the file.")
        connection.pinned_sock.settimeout(remaining)
        chunk = response.read1(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise FetchRefused(f"The file at the URL is larger than {max_bytes} bytes.")
        chunks.append(chunk)
