"""The four wire formats agents speak, behind one WireFormat protocol."""

from __future__ import annotations

from sandlot.gateway.formats.base import (
    FormatName,
    ModelTurn,
    RequestView,
    SSEParser,
    ToolCall,
    ToolSpec,
    Usage,
    WireFormat,
)
from sandlot.gateway.formats.chat import ChatFormat
from sandlot.gateway.formats.gemini import GeminiFormat
from sandlot.gateway.formats.messages import MessagesFormat
from sandlot.gateway.formats.responses import ResponsesFormat

FORMATS: dict[str, WireFormat] = {
    "chat": ChatFormat(),
    "messages": MessagesFormat(),
    "responses": ResponsesFormat(),
    "gemini": GeminiFormat(),
}

__all__ = ["FORMATS", "FormatName", "ModelTurn", "RequestView", "SSEParser", "ToolCall",
           "ToolSpec", "Usage", "WireFormat"]
