"""services.prepare.http."""
