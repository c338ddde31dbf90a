"""The session processor's control decisions over a budget observation, pure: the facts
and effects (``effects``) and the decisions (``observation``)."""
