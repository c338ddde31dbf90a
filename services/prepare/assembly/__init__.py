"""services.prepare.assembly."""
