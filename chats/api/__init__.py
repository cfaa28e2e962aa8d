"""HTTP API v1: JSON over HTTP with per-person bearer tokens (reference: docs/API.md).

`urls` routes, `views` stay thin, `endpoint` holds what every view shares (CSRF exemption,
methods, authentication, rate limit, error rendering), `parsing` validates input,
`services`/`selectors` hold the API's own write and reads, `render` the JSON shapes.
"""
