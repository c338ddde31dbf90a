"""The model's window: its budget (model profiles, calibration), the records a renderer
holds in view, and what a release's policy keeps of them (retention classes, active
skills, a child's transfer, the model serving each purpose). Above ``domain.policy``
(the policy's declarations), below ``domain.context`` (assembly and rendering)."""
