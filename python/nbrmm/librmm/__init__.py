"""rmm's ``rmm.librmm`` package, which holds the Cython declarations of librmm's C++ API
and no public Python names. nbrmm's C++ API is ``<nbrmm/nbrmm.hpp>`` (see
:func:`nbrmm.get_include`)."""

__all__: list[str] = []
