"""A small MCP server (the SDK's `MCPServer`, over stdio) whose tools return what a
screenshot or export tool does: images and embedded resources, for the tests of tool
results that become attachments (tests/toolservers/test_result_files.py).

`python tests/toolservers/picture_server.py` serves it over stdio.
"""

import base64
import struct
import zlib

from mcp.server.mcpserver import MCPServer
from mcp_types import (
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

READ_ONLY = ToolAnnotations(read_only_hint=True)


def png(width: int, height: int, red: int = 255) -> bytes:
    """A valid PNG of one colour: signature, IHDR, one IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([red, 0, 0]) * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def build() -> MCPServer:
    server = MCPServer("pictures")

    @server.tool(annotations=READ_ONLY)
    def screenshot(count: int = 1) -> list:
        """Take `count` screenshots (PNG images), with a line of text."""
        shots = [
            ImageContent(type="image", data=b64(png(4 + n, 3, red=255 - n)), mime_type="image/png")
            for n in range(count)
        ]
        return [TextContent(type="text", text=f"{count} screenshot(s) taken."), *shots]

    @server.tool(annotations=READ_ONLY)
    def export(kilobytes: int = 1) -> list:
        """Export a report: an embedded binary resource of `kilobytes` KB (claimed as
        PDF, which its bytes are not) and an embedded text resource."""
        blob = (b"\x00\x01binary export " * 64 * kilobytes)[: kilobytes * 1024]
        return [
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="file:///exports/report%20q3.bin",
                    blob=b64(blob),
                    mime_type="application/pdf",
                ),
            ),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="file:///exports/summary.md", text="# Q3\nAll good."
                ),
            ),
        ]

    return server


if __name__ == "__main__":
    build().run()
