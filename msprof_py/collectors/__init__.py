"""Recording: sessions, the recorder, the launcher and the bootstrap launched processes import."""
