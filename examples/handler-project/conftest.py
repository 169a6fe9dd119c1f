# Empty on purpose: pytest puts this folder on sys.path for it, so `orders_handlers` is
# importable in the tests without installing the package first.
