"""robolearn: sample-efficient robot learning with one env contract for sim and hardware.

Importing the package registers every `robolearn/...` Gymnasium env ID.
"""
from robolearn.env import RobotEnv, register_all, registered_ids

__version__ = "0.1.0"
__all__ = ["RobotEnv", "register_all", "registered_ids", "__version__"]

register_all()
