"""`robolearn algos`: registered learning algorithms, one per line (scripts rely on this)."""
HELP = "Print every registered learning algorithm name, one per line."


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from robolearn.policies.registry import ALGOS

    for name in ALGOS:
        print(name)
    return 0
