def judge_reachability(objects): return []
