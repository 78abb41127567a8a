print("make demo: coming in a later step (issue 5).")
