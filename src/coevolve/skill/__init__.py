"""The skill world (see ``coevolve.skill.world``)."""
