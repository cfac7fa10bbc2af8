package cidr

# net.cidr_contains and net.cidr_intersects run inside the compiled module.
contains_address if net.cidr_contains(input.network, input.address)

intersects if net.cidr_intersects(input.network, input.other)
