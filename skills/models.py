"""Skill models arrive with the skills issue; the app is installed and empty."""
