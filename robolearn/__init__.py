"""robolearn: sample-efficient robot learning with one env contract for sim and hardware.

Importing the package registers every `robolearn/...` Gymnasium env ID.
"""
from robolearn.registry import register_all, registered_ids
from robolearn.env import RobotEnv

__version__ = "0.1.0"
__all__ = ["RobotEnv", "register_all", "registered_ids", "__version__"]

register_all()
