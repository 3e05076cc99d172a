"""librmm's debug logger (rmm's ``rmm.pylibrmm.logger``): the functions of
:mod:`nbrmm.logger`, as the same objects."""

from nbrmm.logger import (
    flush_logger,
    get_flush_level,
    get_logging_level,
    level_enum,
    set_flush_level,
    set_logging_level,
    should_log,
)

__all__ = [
    "flush_logger",
    "get_flush_level",
    "get_logging_level",
    "level_enum",
    "set_flush_level",
    "set_logging_level",
    "should_log",
]
