"""The notebook layer: ``%load_ext nbmp``, the ``%%nbmp`` cell magic and ``%nbmp`` commands.

``magics`` imports IPython, so nothing imports it but ``nbmp.load_ipython_extension``
(``from nbmp._notebook.magics import load``) -- in particular not this façade: a
spawned worker that unpickles a ``cellprogram.CellProgram`` must not load IPython.
"""

from .cellprogram import CellProgram

__all__ = ["CellProgram"]
