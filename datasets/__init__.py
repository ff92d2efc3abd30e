"""The published datasets, shipped as package data of ``faultlab.published`` (found by
:mod:`faultlab.datasets.registry`). A regular package, not a namespace one: an editable
install of a namespace package puts a relative entry on ``sys.path``, which Python
resolves in the working folder, so a folder of that name there would be imported from
(``docs/security.md``)."""
