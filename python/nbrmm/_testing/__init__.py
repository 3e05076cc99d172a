"""Test support shipped with nbrmm: ``cpp_ext``, a C++ extension that is not nbrmm.

It uses librmm directly and exchanges resources and buffers with nbrmm only through the
public C++ API in ``<nbrmm/nbrmm.hpp>``; the test suite uses it to check that Python and
C++ share one current device resource.
"""
