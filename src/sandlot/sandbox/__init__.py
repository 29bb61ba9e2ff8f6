"""Sandbox backends: where a trial's commands run, isolated from the host and each other."""

from sandlot.sandbox.base import ExecResult, Sandbox, SandboxSpec

__all__ = ["ExecResult", "Sandbox", "SandboxSpec"]
