"""What keeps a pod to itself on a host it shares with others, as a cluster's pod sandbox
does: a network namespace per JobSet (:mod:`.sandbox`, held by :mod:`.netns_holder`), its own
hostname (:mod:`.uts`), memory and CPU limits (:mod:`.cgroups`), host ports no other job uses
(:mod:`.ports`), a pod network's addresses (:mod:`.podaddress`), Services by name
(:mod:`.servicedns`), and sshd and ssh for MPI pods (:mod:`.ssh`, :mod:`.sshnode`)."""
