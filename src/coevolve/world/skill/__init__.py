"""The skill world (see ``coevolve.world.skill.problems``)."""
