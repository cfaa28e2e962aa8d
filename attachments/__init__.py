"""Files on messages: sniffed, hashed, stored once per content, served only to readers."""
