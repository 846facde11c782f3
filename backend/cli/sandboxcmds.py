def register(sub) -> None:
    pass
