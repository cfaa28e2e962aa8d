"""Memory models arrive with the team-memory issue; the app is installed and empty."""
