"""Coordinators: producer ids now; the group coordinator and transactions later."""
