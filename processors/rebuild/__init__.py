"""Shadow rebuilds on the product side: load an export into a new generation, catch
up, cut over."""
