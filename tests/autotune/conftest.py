from sglang_wheels import sglang_0_5_12, sglang_0_5_23

__all__ = ["sglang_0_5_12", "sglang_0_5_23"]
