"""Meta-evaluation: how well metrics agree with people, and how sure we can be."""
