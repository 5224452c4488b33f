"""nbmp's live worker dashboard (ipywidgets in a notebook, text elsewhere).

The state model and text renderer never import ipywidgets; only the view does.
"""

__all__: list = []
