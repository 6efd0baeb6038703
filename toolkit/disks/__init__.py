"""Data disks: facts about block devices, the pure planner and its safety rules."""
