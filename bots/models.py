"""Telegram bridge models arrive with the Telegram issue; the app is installed and empty."""
