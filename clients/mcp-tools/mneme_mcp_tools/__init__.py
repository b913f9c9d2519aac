"""Mneme's MCP tools, defined once for every door (``tools``), and the ``Executor`` each
door supplies to reach Mneme (``executor``)."""

from mneme_mcp_tools.executor import Executor, Json, Refused
from mneme_mcp_tools.tools import CALLER, TOOLS, Caller, build_server

__all__ = ["CALLER", "TOOLS", "Caller", "Executor", "Json", "Refused", "build_server"]
