"""`robolearn envs`: the registered env IDs, one per line (scripts and tests rely on this)."""
HELP = "Print every registered robolearn env ID, one per line."


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from robolearn.registry import registered_ids

    for env_id in registered_ids():
        print(env_id)
    return 0
